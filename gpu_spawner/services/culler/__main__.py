from gpu_spawner.services.culler.service import main

main()
